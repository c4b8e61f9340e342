select
    c.customer_id,
    c.first_name,
    count(e.event_id) as events,
    coalesce(sum(e.amount), 0) as spent_online
from {{ ref('customers') }} c
left join {{ ref('page_events') }} e using (customer_id)
group by all
