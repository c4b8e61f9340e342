-- Incremental, not microbatch: it replaces the interval twice names (twice_start/twice_end).
{{ config(
    materialized='incremental',
    incremental_strategy='append',
    event_time='day',
    pre_hook="{% if is_incremental() and var('twice_start', none) %}delete from {{ this }} where day >= cast('{{ var('twice_start') }}' as date) and day < cast('{{ var('twice_end') }}' as date){% endif %}",
) }}

select cast(event_time as date) as day, count(*) as events, sum(amount) as revenue
from {{ ref('page_events') }}
where kind = 'purchase'
{% if var('twice_start', none) %}
  and event_time >= cast('{{ var('twice_start') }}' as timestamp)
  and event_time < cast('{{ var('twice_end') }}' as timestamp)
{% endif %}
group by 1
