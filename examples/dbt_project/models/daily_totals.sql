-- An incremental model that is not microbatch: twice passes the interval as the variables
-- twice_start / twice_end, and the model replaces that slice itself (the pre-hook deletes it
-- inside the model's transaction, then the interval's rows are appended).
{{ config(
    materialized='incremental',
    incremental_strategy='append',
    event_time='day',
    pre_hook="{% if is_incremental() and var('twice_start', none) %}delete from {{ this }} where day >= cast('{{ var('twice_start') }}' as date) and day < cast('{{ var('twice_end') }}' as date){% endif %}",
) }}

select
    cast(event_time as date) as day,
    count(*) as events,
    count(distinct user_id) as users,
    sum(signed_amount) as net_amount
from {{ ref('stg_events') }}
{% if var('twice_start', none) %}
where event_time >= cast('{{ var('twice_start') }}' as timestamp)
  and event_time < cast('{{ var('twice_end') }}' as timestamp)
{% endif %}
group by 1
